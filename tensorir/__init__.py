"""tensorir: a tensor compiler from ONNX / TensorFlow models to native code."""

from tensorir.errors import TirError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.runtime.reference import run_reference

__version__ = "0.1.0"

__all__ = ["Graph", "TensorType", "TirError", "Value", "__version__", "from_onnx", "run_reference"]
