"""Submissions that attack the teacher's machine instead of answering: one per threat of issue 26.

Each is the small key's honest solution (:func:`submissions.small`) with one answer cell replaced
by an attack, so a sealed grader must score that question 0 and the others in full. An attack
that would pay (the key's solutions, a classmate's answers, a network answer) defines the answer
when it succeeds; :data:`PLACES` holds the paths and numbers the tests give it: the key's path,
the submissions and grades folders, the grader's pid, a port the test listens on.
"""

from __future__ import annotations

import nbformat

from submissions import small

#: The answer cell each attack replaces: q7.1's function (which has hidden inputs) or q7.2's value.
STALENESS, MEAN = "q7-1-answer", "q7-2-answer"

# Exec every solution block of a notebook: what a student does with the key once found.
EXEC_SOLUTIONS = """
def exec_solutions(path):
    import json
    for cell in json.load(open(path))["cells"]:
        source = "".join(cell["source"])
        if "# BEGIN SOLUTION" in source and "def staleness" in source:
            exec(source, globals())
"""

ATTACKS = {
    # the key, read from where the teacher keeps it
    "key_by_path": (STALENESS, EXEC_SOLUTIONS + "exec_solutions({key!r})"),
    # the key, found by searching the usual folders for the instructor's notebook
    "key_by_search": (STALENESS, EXEC_SOLUTIONS + """
import os
for top in ["/tmp", "/home", "/root", "/work", "/srv", "/mnt", os.path.expanduser("~"), os.getcwd()]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in (".venv", "site-packages", ".git", ".pyenv")]
        for name in files:
            if name.endswith(".ipynb"):
                try:
                    text = open(os.path.join(folder, name)).read()
                except OSError:
                    continue
                if "BEGIN SOLUTION" in text and "def staleness" in text:
                    exec_solutions(os.path.join(folder, name))
"""),
    # a classmate's notebook: copy its answer, then overwrite it with a blank one
    "aa_classmate_copier": (STALENESS, EXEC_SOLUTIONS.replace(
        '"# BEGIN SOLUTION" in source and ', "") + """
victim = {submissions!r} + "/zz_classmate.ipynb"
try:
    exec_solutions(victim)
finally:
    open(victim, "w").write("{{}}")
"""),
    # the grades folder: a forged table, and a record slipped into the grader's own files
    "grades_writer": (MEAN, """
import glob, os
os.makedirs({grades!r}, exist_ok=True)
open({grades!r} + "/grades.csv", "w").write("student,total\\ngrades_writer,100\\n")
open({grades!r} + "/forged.txt", "w").write("forged")
for log in glob.glob("/tmp/mt-grader-*/*.jsonl"):
    open(log, "a").write('{{"question": "q7.2", "data": 1.6666666666666667}}\\n')
predicted_mean = None
"""),
    # the installed package: make every judge say right, for this run and the next
    "package_editor": (MEAN, """
import mirrortutor.grading.checks as checks
with open(checks.__file__, "a") as f:
    f.write("\\nverdict = lambda q, data, hidden: (True, 'patched')\\n")
predicted_mean = None
"""),
    # the network: fetch the answer from a server (the test listens on the host's loopback)
    "network": (MEAN, """
import socket
answer = socket.create_connection(("127.0.0.1", {port}), timeout=3).recv(100).decode()
predicted_mean = float(answer)
"""),
    "fork_bomb": (MEAN, "import os\nwhile True:\n    os.fork()"),
    # fill the disk: files of 1 GB each, for ever
    "disk_filler": (MEAN, """
chunk, n = b"x" * (1 << 20), 0
while True:
    with open(f"fill{{n}}", "wb") as f:
        for _ in range(1024):
            f.write(chunk)
    n += 1
"""),
    # kill the grader: every process in sight, the parent, and the grader's own pid
    "grader_killer": (MEAN, """
import os, signal
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + [os.getppid(), {grader}]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""),
    # delete everything it can reach, the key and the class first
    "deleter": (MEAN, """
import os, shutil
for path in [{key!r}, {submissions!r}, {grades!r}, "/work", "/root", "/tmp", "/home", "/usr"]:
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.remove(path)
    except OSError:
        pass
"""),
    "sleeper": (MEAN, "import time\ntime.sleep(10 ** 6)"),
}


def attack(name: str, **places) -> nbformat.NotebookNode:
    """The small key's honest solution with ``name``'s answer cell replaced by the attack."""
    cell, source = ATTACKS[name]
    return small({cell: source.strip().format(**places)})
