"""HTTP/2 pairing: a response answers the request of its stream; calls the requester reset,
a GOAWAY refused, the close cut short or no answer came to end without one."""

from __future__ import annotations

from dataclasses import dataclass

from otel_ebpf import _fast

from ..base import Record, SmallDeque, positional_maker
from .parse import H2Message, H2Request, H2Response, HTTP2State


@dataclass(slots=True, kw_only=True)
class H2Record(Record):
    """One stream: its request and response. `response` may be partial (no END_STREAM
    seen) when `error` says how the call ended: "reset" (by the requester, see
    request.reset), "goaway" (refused), "connection_closed", "timeout" (no answer within
    response_timeout), "evicted" (more calls open than the connection's stream table)."""

    request: H2Request
    response: H2Response | None = None
    error: str | None = None
    end_ns: int = 0  # the last byte of the response, or the best time known for the end


# H2Record(request=, response=, end_ns=) in one call: one per call at each end
_new_record = positional_maker(H2Record, ("request", "response", "end_ns"))


def stitch(state: HTTP2State, now_ns: int, timeout_ns: int) -> list[H2Record]:
    """pair, with the queues taken from the state (callers outside the tracker)."""
    return pair(state.frames[state.requests], state.frames[state.responses], now_ns, state,
                timeout_ns)


def pair(requests: SmallDeque, responses: SmallDeque, now_ns: int, state: HTTP2State,
         timeout_ns: int) -> list[H2Record]:
    """Records of the streams whose response ended or whose call ended otherwise (reset,
    refused, the close: state.closed, a timeout)."""
    fast = compiled
    if COMPILED and fast is not None:  # _stitch.c, this its reference
        done = fast.pair(requests, responses, now_ns, state, timeout_ns)
        if done is not None:
            return done
    records: list[H2Record] = []
    while requests:
        request = requests.popleft()
        _settle(state, request)
        state.waiting[request.stream_id] = request
    while responses:
        response = responses.popleft()
        _settle(state, response)
        request = state.waiting.pop(response.stream_id, None)
        if request is None:
            state.orphan_responses += 1  # its request was lost, or came before capture
            continue
        records.append(_new_record(request, response, max(response.end_ns, request.start_ns)))
    _expire(records, now_ns, state, timeout_ns)
    return records


def _expire(records: list[H2Record], now_ns: int, state: HTTP2State, timeout_ns: int) -> None:
    """Records of the waiting requests whose call ended without an answer, or beyond the
    stream table's bound."""
    for stream_id, request in list(state.waiting.items()):
        error = _ended(request, state, now_ns, timeout_ns)
        if error is None and len(state.waiting) <= state.max_streams:
            continue
        del state.waiting[stream_id]
        stream = state.streams.pop(stream_id, None)
        partial = stream.response if stream is not None else None
        # the reset or the close came after the last byte we can time: the latest one
        late = error == "reset" or partial is not None
        end = max(request.end_ns, state.last_ns) if late else request.end_ns
        records.append(H2Record(request=request, response=partial, error=error or "evicted",
                                end_ns=end))


def _ended(request: H2Request, state: HTTP2State, now_ns: int, timeout_ns: int) -> str | None:
    if request.reset is not None:
        return "reset"
    if request.refused:
        return "goaway"
    if state.closed:
        return "connection_closed"
    # an answer under way may stream for long: it times out only when its bytes were lost
    if now_ns - request.end_ns > timeout_ns and (request.stale or not request.response_started):
        return "timeout"
    return None


def _settle(state: HTTP2State, frame: H2Message) -> None:
    """Move the tracker's timing of a frame from the bytes it counted before the message
    (its lead, see parse.py) to the message's first HEADERS byte. Runs before correlate/
    reads the frame: the agent collects every connection it fed before handing frames on."""
    lead = frame.lead
    if frame.epoch != frame.head_epoch:
        frame.tcp_seq = None  # bytes were lost in between: the position is unknown
    elif lead:
        frame.stream_pos += lead
        if frame.tcp_seq is not None:
            frame.tcp_seq = (frame.tcp_seq + lead) & 0xFFFFFFFF
        if isinstance(frame, H2Request) and not frame.exact:
            # the lead came in an earlier syscall: its time, thread and task are not ours
            frame.start_ns = frame.end_ns
            frame.tid = frame.task = 0
    state.last_ns = max(state.last_ns, frame.end_ns)


# pair's usual steps in C where the agent's extensions are built (False: this file's pair,
# the reference, alone; tests compare the two)
COMPILED = True
# this file's compiled implementation (_stitch.c: pair, and spans.py's gRPC span), None on
# the pure Python path; looked up when called, so setting it to None turns both off
compiled = _fast.accelerator(__name__)
if compiled is not None:
    compiled.setup_pair(H2Request, H2Response, HTTP2State, _new_record, _expire)
