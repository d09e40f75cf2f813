"""The autodiff engine: tensors, primitives, the backward pass. Knows nothing of neural nets."""

from . import primitives  # noqa: F401  (registers every primitive)
from .anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled  # noqa: F401
from .backend import DeviceError  # noqa: F401
from .checkpoint import checkpoint  # noqa: F401
from .custom import CustomOp, custom_op  # noqa: F401
from .errors import DTypeError, GraphError, IndexOutOfRange, ShapeError  # noqa: F401
from .functional import grad, hessian, hvp, jacobian, jvp, value_and_grad, vjp  # noqa: F401
from .gradcheck import GradcheckError, GradcheckReport, gradcheck  # noqa: F401
from .graph import enable_grad, gradients, is_grad_enabled, no_grad  # noqa: F401
from .ops import *  # noqa: F401,F403
from .plan import CompiledFunction, TraceError, compile, effect  # noqa: F401
from .tensor import Tensor  # noqa: F401
from .tensor_torch import attach as _attach_torch_methods

_attach_torch_methods()
