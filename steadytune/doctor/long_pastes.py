"""What doctor reads of a long paste. Every line of a paste is searched by several hundred patterns (the error
classes, the facts, the rules), so reading time grows with the text: a 10,000-step training log (780 KB) took 25 s of
CPU read whole, and twenty 30 KB lines 9 s. A long log states its causes in a few places: the head (versions, the
environment, the command), the tail (where the run died) and its error lines. Those are kept; every other line
becomes error_lines.NOT_READ, so a line number doctor quotes is still the line of the user's file."""

from __future__ import annotations

from steadytune.doctor.error_lines import NOT_READ, is_error_line

READ_WHOLE = 1_000       # lines: a paste up to this long is read whole (every mined case is under 100)
HEAD, TAIL = 200, 200    # lines kept from the start and the end of a longer one
AROUND = 3               # lines kept either side of an error line (a traceback's message and its last frames)
MAX_ANCHORS = 120        # error lines given their surroundings: the first and last halves of this many (a log that
                         # repeats one warning thousands of times says the same thing in each)
MAX_LINE_CHARS = 2_000   # a longer line (a base64 blob, a JSON dump) is read to this length: a cause is said early
SCANNED = 10_000         # lines of the middle searched for error lines: its first and last halves (a log of a
                         # million lines is read in seconds; the run's end is in the tail)


def lines_to_read(lines: list[str]) -> list[str]:
    """The paste's lines with those not read replaced by NOT_READ, and every line cut to MAX_LINE_CHARS."""
    lines = [line[:MAX_LINE_CHARS] for line in lines]
    if len(lines) <= READ_WHOLE:
        return lines
    middle = range(HEAD, max(HEAD, len(lines) - TAIL))
    if len(middle) > SCANNED:
        middle = [*middle[:SCANNED // 2], *middle[-(SCANNED // 2):]]
    anchors = [n for n in middle if is_error_line(lines[n])]
    if len(anchors) > MAX_ANCHORS:
        anchors = anchors[:MAX_ANCHORS // 2] + anchors[-(MAX_ANCHORS // 2):]
    keep = set(range(min(HEAD, len(lines)))) | set(range(max(0, len(lines) - TAIL), len(lines)))
    for n in anchors:
        keep.update(range(max(0, n - AROUND), min(len(lines), n + AROUND + 1)))
    return [line if n in keep else NOT_READ for n, line in enumerate(lines)]
