"""Grading: exercise checks for students, and release and grading tools for teachers.

- :mod:`.checks` and :mod:`.questions`: ``mt.check`` and one questions file per chapter;
  :mod:`.answers`: how a check turns an answer into data and hands it to the grader;
- :mod:`.release`: the student version of an instructor notebook, and the notebook that is graded;
- :mod:`.grade`, :mod:`.marking`, :mod:`.gradebook`: grading a folder of submissions with nbval,
  judging each check's answer data in the grader's process, and the results (tables, feedback);
  :mod:`.nbval_log` is the pytest plugin that logs each graded cell and its answers;
- :mod:`.sandbox` and :mod:`.seal`: the sealed kernel each submission runs in (namespaces, a
  read-only view of the Python environment, limits), and its launcher;
- ``python -m mirrortutor.grading release|grade ...`` is the command line (:mod:`.__main__`).

Nothing is imported here, so the grading process's ``-p mirrortutor.grading.nbval_log`` loads
only that plugin.
"""
