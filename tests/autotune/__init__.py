"""Tests of the autotune package."""
