"""Autotuning: search spaces, measurement, cost model and the tuning-record database."""
