"""Algorithmic rewrites of ops that change the arithmetic, not just the loop order
(fast convolution algorithms). Each module registers its own graph ops on import."""
