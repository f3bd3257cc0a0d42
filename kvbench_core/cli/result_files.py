"""The result files a command renders (``report``, ``compare``, ``export``), each read once, at the command's
edge, as the typed ``ResultDocument`` the reports and exports take.

A file that is not a result, or lacks a section the command reads, is refused in the one line every command
says (results/result.py); a complete one is read without judging its format or schema, as the reports render
what was written and judging it is ``kvbench check``'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kvbench_core.results.document import ResultDocument
from kvbench_core.results.result import read_result, require_sections


def read_documents(paths: Sequence[str | os.PathLike[str]], sections: tuple[str, ...]) -> list[ResultDocument]:
    """The document of each file in ``paths``, in order; one line for the first that is not a result or lacks
    one of ``sections``."""
    documents = []
    for path in paths:
        data = read_result(path)
        require_sections(data, path, sections)
        documents.append(ResultDocument.unchecked(data, path))
    return documents
