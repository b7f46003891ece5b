"""Post-training int8 quantization to standard QDQ ONNX models (`tir quantize`)."""

from tensorir.quantize.calib_data import read_calibration
from tensorir.quantize.quantizer import QuantizeResult, quantize_model

__all__ = ["QuantizeResult", "quantize_model", "read_calibration"]
