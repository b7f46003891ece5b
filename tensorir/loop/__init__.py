"""Loop IR: expressions and statements of one kernel, printer, verifier, simplifier."""
