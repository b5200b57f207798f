"""Alert rules as data, the built-in rule pack, and (to come) the evaluation engine."""
