"""Training, as far as mirrortutor goes: the chapters' training is the student's own TensorFlow
(in the notebook, or a program under ``programs/``); this room holds only what watches it or
slows it down on purpose.

- :mod:`.stragglers`: ``mt.straggle``, the one visible line that makes a replica or worker slow;
- :mod:`.diagnose`: ``mt.diagnose``, which reads the recorded steps and names what holds them back;
- :mod:`.job`, :mod:`.jobdata`, :mod:`.fit`, :mod:`.merged`: the multi-worker job the launcher's
  tests still run (to go, as chapter 08 runs a plain program now).

Nothing is imported here.
"""
