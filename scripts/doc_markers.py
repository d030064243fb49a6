# SPDX-License-Identifier: MIT
"""The generated part of a document: the text between the lines "<!-- NAME: begin -->" and
"<!-- NAME: end -->", which the scripts that make tables from measurement files replace, so the docs
never hold a hand-typed figure."""
import sys


def replace_between(path, marker, text, program, check=False):
    """Replaces what stands between `marker`'s two lines in `path` with `text`; exits naming `program`
    and the file where either line is missing. With `check`, writes nothing and exits naming the file
    and the marker where the text there is not `text` (the docs were edited by hand or not regenerated)."""
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    with open(path, encoding="utf-8") as f:
        content = f.read()
    if begin not in content or end not in content:
        sys.exit(f"{program}: {path} has no '{begin}' ... '{end}' lines to replace")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    replaced = head + begin + "\n" + text.rstrip("\n") + "\n" + end + tail
    if check:
        if replaced != content:
            sys.exit(f"{program}: {path}: the text between the {marker} lines is not what the measurement files "
                     "give; regenerate it (--update) instead of editing it")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(replaced)
