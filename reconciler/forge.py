"""What a pipeline tells the forge: one commit status and one sticky comment (GitHub's REST API).

`ray-vast report --plan FILE` on a pull request sets the status `ray-vast/plan` on the pull
request's head commit and keeps one comment on it (found again by a hidden marker and edited,
never a new one per push: Atlantis's and tfaction's sticky comment); `report --applied CODE` on
the merge sets `ray-vast/apply` on the merge commit: applied, stale (exit 3: re-plan in a pull
request) or failed. Everything comes from the variables GitHub Actions sets (GITHUB_API_URL,
GITHUB_REPOSITORY, GITHUB_SHA, GITHUB_EVENT_PATH) and the workflow's token (GITHUB_TOKEN), which
is a secret: it is sent in the Authorization header and said nowhere.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reconciler.errors import InputError, RayVastError

MARKER = "<!-- ray-vast plan{workspace} -->"
COMMENT_LIMIT = 60_000  # GitHub refuses comments over 65,536 characters
DESCRIPTION_LIMIT = 140  # a status description's limit
NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class ForgeError(RayVastError):
    """The forge refused or could not be reached."""


@dataclass(frozen=True)
class Forge:
    api: str
    repository: str
    token: str
    sha: str
    pull: int | None  # the pull request's number (None: not a pull request's run)
    head: str  # the commit a pull request's status belongs on: its head

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Forge:
        missing = [k for k in ("GITHUB_REPOSITORY", "GITHUB_TOKEN", "GITHUB_SHA") if not env.get(k)]
        if missing:
            raise InputError(
                f"ray-vast report runs in GitHub Actions: {', '.join(missing)} not set"
            )
        event = _event(env.get("GITHUB_EVENT_PATH", ""))
        pull_request = event.get("pull_request") or {}
        head = (pull_request.get("head") or {}).get("sha") or env["GITHUB_SHA"]
        return cls(
            api=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            repository=env["GITHUB_REPOSITORY"],
            token=env["GITHUB_TOKEN"],
            sha=env["GITHUB_SHA"],
            pull=pull_request.get("number"),
            head=head,
        )

    def _call(self, method: str, url: str, body: object = None) -> tuple[Any, str]:
        """One REST call: the JSON answer and the Link header (urllib: the vast client alone
        uses httpx, and two calls need no pool)."""
        full = url if url.startswith("http") else self.api + url
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(full, data=data, method=method)  # noqa: S310 - https or the test's forge
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("X-GitHub-Api-Version", "2022-11-28")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                text = answer.read().decode()
                return (json.loads(text) if text else None), answer.headers.get("Link", "")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ForgeError(
                f"the forge answered {exc.code} to {method} {urlsplit(full).path}: {detail}"
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ForgeError(f"the forge at {self.api} could not be reached: {exc}") from exc

    def status(self, sha: str, context: str, state: str, description: str) -> None:
        body = {"state": state, "context": context, "description": description[:DESCRIPTION_LIMIT]}
        self._call("POST", f"/repos/{self.repository}/statuses/{sha}", body)

    def sticky_comment(self, marker: str, text: str) -> str:
        """Edit the pull request's comment that carries `marker`, or make it; "edited" or
        "created"."""
        if self.pull is None:
            raise InputError("report --plan: this run is not a pull request's (no event number)")
        body = {"body": f"{marker}\n{text}"}
        found = self._find(f"/repos/{self.repository}/issues/{self.pull}/comments", marker)
        if found is not None:
            self._call("PATCH", f"/repos/{self.repository}/issues/comments/{found}", body)
            return "edited"
        self._call("POST", f"/repos/{self.repository}/issues/{self.pull}/comments", body)
        return "created"

    def _find(self, path: str, marker: str) -> int | None:
        url: str | None = f"{path}?per_page=100"
        while url is not None:
            comments, link = self._call("GET", url)
            for comment in comments or []:
                if marker in str(comment.get("body", "")):
                    return int(comment["id"])
            found = NEXT.search(link)
            url = found[1] if found else None
        return None


def _event(path: str) -> dict[str, Any]:
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"GITHUB_EVENT_PATH {path} cannot be read: {exc}") from exc
    return doc if isinstance(doc, dict) else {}


def comment_text(plan_text: str, summary: str) -> str:
    """The comment: the summary line, then the plan as a person reads it (cut to fit)."""
    shown = plan_text if len(plan_text) <= COMMENT_LIMIT else plan_text[:COMMENT_LIMIT] + "\n…"
    return f"### ray-vast plan\n\n**{summary}**\n\n```\n{shown}\n```\n"


APPLY_STATES = {0: ("success", "applied: the reviewed plan was carried out")}


def apply_status(code: int) -> tuple[str, str]:
    """The status of an apply's exit code: success, stale (3) or failed."""
    if code in APPLY_STATES:
        return APPLY_STATES[code]
    if code == 3:
        return "failure", "stale: the reviewed plan no longer fits; re-plan in a pull request"
    return "error", f"apply failed (exit {code}): see the job's log"
