"""HTTP/1.x pairing: each response answers the request whose index its head took, in order."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import Record, SmallDeque, positional_maker
from .parse import HTTP1State, HTTPRequest, HTTPResponse


@dataclass(slots=True, kw_only=True)
class HTTPRecord(Record):
    """A request and its response; response None when none came (see `error`)."""

    request: HTTPRequest
    response: HTTPResponse | None = None
    # "timeout": no answer within response_timeout; "connection_closed": closed before one.
    # None with no response: the answer was lost from the capture (a later one was seen).
    error: str | None = None


_new_record = positional_maker(HTTPRecord, ("request", "response"))


def stitch(state: HTTP1State, now_ns: int, timeout_ns: int) -> list[HTTPRecord]:
    """pair, with the queues and flag taken from the state (callers outside the tracker)."""
    frames = state.frames
    return pair(frames[state.requests], frames[state.responses], state.closed, now_ns, state,
                timeout_ns)


def pair(requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
         state: HTTP1State, timeout_ns: int) -> list[HTTPRecord]:
    """Records of the responses in `responses`, each with the request its head answers;
    requests that waited past `timeout_ns` (all, once `closed`) as unanswered."""
    records: list[HTTPRecord] = []
    while responses:
        response = responses[0]
        if requests and requests[0].index == response.index:
            records.append(_new_record(requests.pop(0), responses.pop(0)))
        elif requests and requests[0].index < response.index:
            # HTTP/1 answers in order: a later answer means this one was lost
            records.append(HTTPRecord(request=requests.popleft()))
        elif requests or response.index < 0 or closed or now_ns - response.end_ns > timeout_ns:
            # it answers a request never seen: capture began after it, or its bytes were lost
            responses.popleft()
            state.orphan_responses += 1
        else:
            break  # its request's frame is still being received (a long upload)
    while requests and (closed or _unanswered(requests[0], state, now_ns, timeout_ns)):
        error = "connection_closed" if closed else "timeout"
        records.append(HTTPRecord(request=requests.popleft(), error=error))
    return records


def _unanswered(request: HTTPRequest, state: HTTP1State, now_ns: int, timeout_ns: int) -> bool:
    # an answer whose head was seen is still arriving (a long stream): that is no timeout
    return request.index > state.answered and now_ns - request.end_ns > timeout_ns
