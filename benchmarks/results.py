"""benchmarks/results.json: the measured figures the docs quote, each with where it came from.

A benchmark that feeds a docs table records its figures here (`record`): the rows, and the
date, commit, command and machine of the run. An entry may keep its table as the page shows it
(`columns`, and `rows` of cells) and the figures its section's prose states (`figures`).
Published figures of other projects sit beside them with their `source` instead. The docs build writes the tables of the pages from this
file (docs/hooks/results_tables.py), so a page cannot quote a figure no run produced.
"""

import datetime
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_PATH = os.path.join(REPO_ROOT, "benchmarks", "results.json")
# What a measured entry must name; a published one names its source instead.
MEASURED_FIELDS = ("date", "commit", "command", "machine", "rows")
PUBLISHED_FIELDS = ("source", "rows")


def load_results(path: str = RESULTS_PATH) -> Dict[str, dict]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def current_commit() -> str:
    """The checkout's short commit, with "+changes" when files differ from it (the results
    file aside: benchmarks run one after another write it)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                    ":(exclude)%s" % os.path.relpath(RESULTS_PATH, REPO_ROOT))
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def command_line() -> str:
    """The command that is running, as a reader would type it from the checkout."""
    program = os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)
    return " ".join(["python", program] + sys.argv[1:])


def record(name: str, rows: List, machine: str, path: str = RESULTS_PATH,
           columns: Optional[List[str]] = None) -> dict:
    """Writes entry `name` (replacing an older one) with today's date, the commit, the
    command and `machine`; returns it. With `columns`, `rows` are the cells of the table the
    page shows."""
    results = load_results(path)
    entry = {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
             "commit": current_commit(), "command": command_line(), "machine": machine,
             "rows": rows, **({"columns": columns} if columns else {})}
    results[name] = entry
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(temporary, path)
    return entry


def missing_fields(entry: dict) -> List[str]:
    """The fields an entry lacks: a published one needs its source, a measured one the rest."""
    wanted = PUBLISHED_FIELDS if "source" in entry else MEASURED_FIELDS
    return [field for field in wanted if not entry.get(field)]
