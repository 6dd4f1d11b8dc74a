"""Request-head bounds of `lorarag serve`: a request's header section is at most `max_header_bytes`
and `max_headers` fields, else 431 (Request Header Fields Too Large) and the connection closes.

uvicorn's default HTTP parser (httptools) has no bound on a header line: one 300 MB line was held
whole (and re-joined as it grew) before the app saw the request. h11, uvicorn's other parser, bounds
the bytes of a request head it buffers (its `max_incomplete_event_size`, which uvicorn exposes as
`h11_max_incomplete_event_size`) and marks that refusal as a 431; uvicorn answers every parser
refusal with 400, so `BoundedH11Protocol` answers this one with the status h11 gives, and counts
header fields (h11 does not). The body is not part of the head: its
bound is the app's (`max_body_bytes`, serve/app.py).
"""

from __future__ import annotations

import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


class _Connection(h11.Connection):
    """h11's server connection that also refuses, as a 431, a head of more than `max_headers` fields
    or one over `max_bytes` that arrived whole (h11 bounds only a head still incomplete)."""

    max_headers = 100
    max_bytes = 16 * 1024
    status_hint = 400  # of the last refusal: 431 when the head was too large

    def next_event(self):  # noqa: ANN201 - h11's own return type
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.status_hint = exc.error_status_hint
            raise
        if isinstance(event, h11.Request):
            size = len(event.method) + len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
            if len(event.headers) > self.max_headers or size > self.max_bytes:
                self.status_hint = 431
                raise h11.RemoteProtocolError(
                    f"request head over {self.max_bytes} bytes or {self.max_headers} fields", error_status_hint=431
                )
        return event


def bounded_protocol(max_header_bytes: int, max_headers: int) -> type:
    """The uvicorn `http` protocol class refusing a request head over `max_header_bytes` or
    `max_headers` fields with a 431."""

    class BoundedH11Protocol(H11Protocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            conn = _Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
            conn.max_headers = max_headers
            conn.max_bytes = max_header_bytes
            self.conn = conn

        def send_400_response(self, msg: str) -> None:
            if self.conn.status_hint != 431:
                super().send_400_response(msg)
                return
            log.warning("request refused (431): header section over %d bytes or %d fields", max_header_bytes, max_headers)
            body = b"Request header fields too large"
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
            for event in (
                h11.Response(status_code=431, headers=headers, reason=b"Request Header Fields Too Large"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return BoundedH11Protocol
