"""Case modules for gen_ort_cases.py: one function per op family, each
returning a list of `common.case` records."""
