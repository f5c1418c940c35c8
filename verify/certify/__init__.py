"""Certified upper bounds on a trained student's sup error (issue 46).

- graph.py: student minus teacher at fixed tasks, as one ReLU network of x (DiffNet);
- bounds.py: interval, forward-linear and backward (CROWN, α-CROWN) bounds over boxes, batched
  in torch float64, with a proven rounding margin;
- bab.py: branch and bound over input boxes, best first, to a ratio, a time or a node budget;
- saved.py: a run of `verify.sgd --save` read back (teacher, encoder, split, students);
- certify.py: per support and over a set of supports, the bracket [lower, upper];
- command.py: `python -m verify.certify RUN`.
"""
