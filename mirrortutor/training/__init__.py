"""Training, as far as mirrortutor goes: the chapters' training is the student's own TensorFlow
(in the notebook, or a program under ``programs/``); this room holds only what watches it or
slows it down on purpose.

- :mod:`.stragglers`: ``mt.straggle``, the one visible line that makes a replica or worker slow;
- :mod:`.diagnose`: ``mt.diagnose``, which reads the recorded steps and names what holds them back.

Nothing is imported here.
"""
