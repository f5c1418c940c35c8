"""The task family the constructions approximate: hyperteachers (`hyperteacher.py`, and with
L > 1 modular layers `multilayer.py`), the paper's task encodings (`encodings.py`), the task
splits (`splits.py`) and their names (`task_names.py`, without torch).

This subpackage imports nothing from the rest of `constructions` (only `theory`): the
dependency runs theory ← constructions.tasks ← constructions ← verify ← paper_figures.
"""
