"""High availability of the root service: the election (an epoch-fenced lease row), the term
(the one place that answers "may I act?") and the fenced store every write goes through."""
