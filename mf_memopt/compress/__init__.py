"""Activation compression: methods and formulas, rules, and (with MindSpore) the replacement cells."""
