"""GPU (OpenCL) schedule templates: the work-group mapping of each op family.

common.py (device profile, binding helpers), injective.py (elementwise and data movement),
rows.py (reductions, softmax / norms, pools, and the generic one-output-per-work-item
reduction). Op-specific templates live beside the ops (`tensorir/ops/*_gpu.py`);
each op names its family in its registration (`gpu=` trait) and
`tensorir/ops/gpu_schedules.py` attaches the template.
"""
