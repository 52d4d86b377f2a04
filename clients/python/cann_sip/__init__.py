"""cann_sip — pure Python + numpy client of the sip native protocol.

    from cann_sip import SessionClient, InferenceRequest
    with SessionClient("ipc:///tmp/sip_service.sock") as client:
        resp = client.infer(InferenceRequest(session_pool="image_classification",
                                             inputs={"input_0": image}, timeout_ms=100))
        resp.outputs["output_0"].shape, resp.latency_ms

The same calls as coroutines, for asyncio programs: ``cann_sip.aio.SessionClient``.
See docs/protocol.md for the wire format; ``cann_sip.protocol`` holds the
pure encode/decode functions.
"""

from . import protocol
from .client import Sequence, SessionClient
from .messages import (DEFAULT_ENDPOINT, BatchInferenceRequest, BatchInferenceResponse,
                       InferenceRequest, InferenceResponse, parse_endpoint)
from .shm import SharedMemoryRegion
from .errors import (AlreadyExistsError, CancelledError, DeadlineExceededError,
                     FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
                     PermissionDeniedError, ResourceExhaustedError, SipError, UnavailableError,
                     UnauthenticatedError,
                     UnimplementedError, sip_error_from_code)
from .events import SessionCallback, SessionEvent
from .metrics import MetricsCollector, MetricsSnapshot, PoolMetrics, SessionMetrics
from .protocol import ProtocolError

# The package's version: the project's (CMakeLists.txt, project(sip VERSION ...)).
__version__ = "0.1.0"

__all__ = [
    "SessionClient", "InferenceRequest", "InferenceResponse", "DEFAULT_ENDPOINT",
    "BatchInferenceRequest", "BatchInferenceResponse", "Sequence", "SharedMemoryRegion",
    "parse_endpoint", "protocol", "ProtocolError",
    "SipError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "ResourceExhaustedError", "DeadlineExceededError", "UnavailableError", "CancelledError",
    "UnimplementedError", "FailedPreconditionError", "PermissionDeniedError", "InternalError",
    "UnauthenticatedError",
    "sip_error_from_code", "__version__",
    "MetricsCollector", "MetricsSnapshot", "PoolMetrics", "SessionMetrics",
    "SessionCallback", "SessionEvent",
]
