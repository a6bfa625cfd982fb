"""A fake GitHub REST API on 127.0.0.1, for the pipeline's tests: commit statuses and comments.

`with Forge(token="...") as forge:` serves on a free port (`forge.url` is what GITHUB_API_URL
should be) from a thread, and stops and frees the port on leaving the block. It answers the calls
`ray-vast report` makes, as GitHub's REST API shapes them:

- `POST /repos/{owner}/{repo}/statuses/{sha}` (state, context, description, target_url) and
  `GET /repos/{owner}/{repo}/commits/{ref}/statuses` (newest first);
- `GET` and `POST /repos/{owner}/{repo}/issues/{n}/comments` (`per_page`/`page`, a Link header
  when there are more) and `PATCH /repos/{owner}/{repo}/issues/comments/{id}`.

Every request needs `Authorization: Bearer <token>` (or `token <token>`), else 401. Every call,
answered or not, is recorded in `forge.calls` (method, path, JSON body, status) for tests to
compare with what they expect, as Atlantis's e2e compares its expected replies.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

STATES = ("error", "failure", "pending", "success")
REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
ROUTES = (
    ("POST", re.compile(REPO + r"/statuses/(?P<sha>[0-9a-fA-F]{4,64})$"), "create_status"),
    ("GET", re.compile(REPO + r"/commits/(?P<sha>[^/]+)/statuses$"), "list_statuses"),
    ("GET", re.compile(REPO + r"/issues/(?P<number>\d+)/comments$"), "list_comments"),
    ("POST", re.compile(REPO + r"/issues/(?P<number>\d+)/comments$"), "create_comment"),
    ("PATCH", re.compile(REPO + r"/issues/comments/(?P<id>\d+)$"), "edit_comment"),
)


@dataclass(frozen=True)
class Call:
    """One request the forge received and the status it answered."""

    method: str
    path: str
    body: Any
    status: int


@dataclass
class Answer:
    """A response: status, JSON body, extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def not_found() -> Answer:
    """GitHub's 404."""
    return Answer(404, {"message": "Not Found"})


class Forge:
    """The fake API: its state (statuses, comments) and the server that serves it."""

    def __init__(self, token: str = "ghs_test_token", login: str = "github-actions[bot]") -> None:
        self.token = token
        self.login = login
        self.calls: list[Call] = []
        self.statuses: dict[str, list[dict[str, Any]]] = {}  # "owner/repo@sha" -> oldest first
        self.comments: dict[int, dict[str, Any]] = {}  # id -> comment
        self.lock = threading.Lock()
        self.next_id = 1
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root, for GITHUB_API_URL."""
        assert self.server is not None, "the forge is not serving"
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Forge:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self))
        self.server.daemon_threads = True
        # shutdown() waits for the loop's next poll: 0.05 s, not serve_forever's 0.5 s
        serve = lambda: self.server.serve_forever(poll_interval=0.05)  # noqa: E731
        self.thread = threading.Thread(target=serve, name="forge", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def statuses_of(self, sha: str, repo: str | None = None) -> list[dict[str, Any]]:
        """The statuses posted on `sha` (in any repository unless `repo`), oldest first."""
        return [
            status
            for key, posted in self.statuses.items()
            if key.endswith(f"@{sha}") and (repo is None or key == f"{repo}@{sha}")
            for status in posted
        ]

    def comments_on(self, number: int, repo: str | None = None) -> list[dict[str, Any]]:
        """The comments now on issue or PR `number`, oldest first."""
        return [
            c
            for c in self.comments.values()
            if c["number"] == number and (repo is None or c["repo"] == repo)
        ]

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries the token (`Bearer` or `token` scheme)."""
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() in ("bearer", "token") and given.strip() == self.token

    def answer(self, method: str, target: str, body: Any) -> Answer:
        """Route one authorized request to its handler."""
        parts = urlsplit(target)
        for verb, pattern, handler in ROUTES:
            match = pattern.match(parts.path)
            if verb == method and match:
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                answer: Answer = getattr(self, handler)(match.groupdict(), body, query)
                return answer
        return not_found()

    def stamp(self) -> tuple[int, str]:
        """A fresh id and a timestamp that orders like the calls do."""
        number = self.next_id
        self.next_id += 1
        return number, f"2026-01-01T00:{number // 60 % 60:02d}:{number % 60:02d}Z"

    def create_status(self, route: dict[str, str], body: Any, query: dict[str, str]) -> Answer:
        """POST .../statuses/{sha}: record a commit status."""
        if not isinstance(body, dict) or body.get("state") not in STATES:
            return Answer(422, {"message": "Validation Failed", "field": "state"})
        number, when = self.stamp()
        status = {
            "id": number,
            "state": body["state"],
            "context": body.get("context", "default"),
            "description": body.get("description"),
            "target_url": body.get("target_url"),
            "created_at": when,
            "updated_at": when,
        }
        key = f"{route['owner']}/{route['repo']}@{route['sha']}"
        self.statuses.setdefault(key, []).append(status)
        return Answer(201, status)

    def list_statuses(self, route: dict[str, str], body: Any, query: dict[str, str]) -> Answer:
        """GET .../commits/{ref}/statuses: newest first, as GitHub lists them."""
        key = f"{route['owner']}/{route['repo']}@{route['sha']}"
        return Answer(200, list(reversed(self.statuses.get(key, []))))

    def list_comments(self, route: dict[str, str], body: Any, query: dict[str, str]) -> Answer:
        """GET .../issues/{n}/comments: one page, oldest first, a Link to the next page."""
        repo = f"{route['owner']}/{route['repo']}"
        every = [public(c) for c in self.comments_on(int(route["number"]), repo)]
        per_page = min(int(query.get("per_page", "30")), 100)
        page = int(query.get("page", "1"))
        shown = every[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(every):
            after = f"{self.url}/repos/{repo}/issues/{route['number']}/comments"
            headers["Link"] = f'<{after}?per_page={per_page}&page={page + 1}>; rel="next"'
        return Answer(200, shown, headers)

    def create_comment(self, route: dict[str, str], body: Any, query: dict[str, str]) -> Answer:
        """POST .../issues/{n}/comments: a new comment by the token's user."""
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Answer(422, {"message": "Validation Failed", "field": "body"})
        number, when = self.stamp()
        repo = f"{route['owner']}/{route['repo']}"
        self.comments[number] = {
            "id": number,
            "repo": repo,
            "number": int(route["number"]),
            "body": body["body"],
            "user": {"login": self.login, "type": "Bot"},
            "html_url": f"https://github.com/{repo}/pull/{route['number']}#issuecomment-{number}",
            "created_at": when,
            "updated_at": when,
        }
        return Answer(201, public(self.comments[number]))

    def edit_comment(self, route: dict[str, str], body: Any, query: dict[str, str]) -> Answer:
        """PATCH .../issues/comments/{id}: replace a comment's body."""
        comment = self.comments.get(int(route["id"]))
        if comment is None or comment["repo"] != f"{route['owner']}/{route['repo']}":
            return not_found()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return Answer(422, {"message": "Validation Failed", "field": "body"})
        comment["body"] = body["body"]
        comment["updated_at"] = self.stamp()[1]
        return Answer(200, public(comment))


def public(comment: dict[str, Any]) -> dict[str, Any]:
    """A comment as the API shows it (without the forge's own bookkeeping keys)."""
    return {k: v for k, v in comment.items() if k not in ("repo", "number")}


def handler_for(forge: Forge) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to `forge`."""

    class Handler(BaseHTTPRequestHandler):
        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body, answer = raw.decode(errors="replace"), Answer(400, {"message": "bad JSON"})
            else:
                answer = Answer(401, {"message": "Bad credentials"})
            with forge.lock:
                if answer.status != 400 and forge.authorized(self.headers.get("Authorization")):
                    answer = forge.answer(self.command, self.path, body)
                path = urlsplit(self.path).path
                forge.calls.append(Call(self.command, path, body, answer.status))
            data = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.handle_any()

        def do_POST(self) -> None:
            self.handle_any()

        def do_PATCH(self) -> None:
            self.handle_any()

        def do_PUT(self) -> None:
            self.handle_any()

        def do_DELETE(self) -> None:
            self.handle_any()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read `forge.calls`, not a log."""

    return Handler
