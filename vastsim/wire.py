"""HTTP on the wire: requests and responses the way vast writes them.

JSON answers carry `Content-Type: application/json` exactly (the official CLI's `search offers`
refuses anything else, even with `; charset=utf-8`). Error bodies are `{"success": false,
"error": code, "msg": text}`. `DropConnection` is how a handler asks the server to close the
connection without answering (a lost response).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

JSON = "application/json"


class DropConnection(Exception):
    """Close the connection without sending a response."""


class BadRequest(Exception):
    """The request cannot be read (bad JSON, bad parameter)."""

    def __init__(self, error: str, msg: str) -> None:
        super().__init__(msg)
        self.error = error
        self.msg = msg


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    client: str
    base_url: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, Any]) -> Request:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        headers = {
            key[5:].replace("_", "-").lower(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = str(environ["CONTENT_TYPE"])
        host = headers.get("host") or (
            f"{environ.get('SERVER_NAME', 'localhost')}:{environ.get('SERVER_PORT', '80')}"
        )
        return cls(
            method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
            path=str(environ.get("PATH_INFO", "/")) or "/",
            query=dict(parse_qsl(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)),
            headers=headers,
            body=body,
            client=str(environ.get("REMOTE_ADDR", "")),
            base_url=f"{environ.get('wsgi.url_scheme', 'http')}://{host}",
        )

    def json(self) -> Any:
        """The body as JSON (an empty body is `{}`)."""
        if not self.body.strip():
            return {}
        try:
            return json.loads(self.body)
        except ValueError:
            raise BadRequest("invalid_request", "Request body is not valid JSON") from None

    def json_object(self) -> dict[str, Any]:
        data = self.json()
        if not isinstance(data, dict):
            raise BadRequest("invalid_request", "Request body must be a JSON object")
        return data

    def query_json(self, name: str, default: Any) -> Any:
        """A query parameter that carries JSON text (how the clients send dicts and lists)."""
        text = self.query.get(name)
        if text is None or text == "":
            return default
        try:
            return json.loads(text)
        except ValueError:
            raise BadRequest(
                "invalid_request", f"Error in query parameters: {name} is not valid JSON"
            ) from None

    @property
    def api_key(self) -> str | None:
        """The presented key: `Authorization: Bearer <key>` or the `api_key` query parameter."""
        auth = self.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return self.query.get("api_key") or None


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = field(default=())

    @property
    def status_line(self) -> str:
        try:
            phrase = HTTPStatus(self.status).phrase
        except ValueError:
            phrase = "Unknown"
        return f"{self.status} {phrase}"

    def header_list(self) -> list[tuple[str, str]]:
        return [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            *self.headers,
        ]

    def json(self) -> Any:
        return json.loads(self.body)


def json_response(
    data: Any, status: int = 200, headers: Iterable[tuple[str, str]] = ()
) -> Response:
    return Response(status, json.dumps(data).encode(), JSON, tuple(headers))


def error(status: int, code: str, msg: str, **extra: Any) -> Response:
    return json_response({"success": False, "error": code, "msg": msg, **extra}, status)


def text_response(status: int, text: str, content_type: str = "text/plain") -> Response:
    return Response(status, text.encode(), content_type)


def html_error(status: int) -> Response:
    """What a gateway in front of vast answers on a 5xx: an HTML page."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    page = (
        f"<html>\r\n<head><title>{status} {phrase}</title></head>\r\n<body>\r\n"
        f"<center><h1>{status} {phrase}</h1></center>\r\n<hr><center>nginx</center>\r\n"
        "</body>\r\n</html>\r\n"
    )
    return Response(status, page.encode(), "text/html")
