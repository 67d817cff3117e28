#!/bin/sh
# A RainStorm exec operator (see docs/rainstorm.md, "The exec line protocol").
# One record per input line, fields separated by tabs; one answer per line:
# "filter" drops the record, "forward<TAB>fields" passes it on.
# This one keeps traffic signs on a Telespar post (column 7, Sign_Post) and
# upper-cases their Category (column 9).
# The worker waits for each answer before it counts a record done, so the
# program must answer a line without waiting for more input: fflush() after
# each answer, and mawk (Debian's awk) needs -W interactive or it waits to
# fill its input buffer.
interactive=
if awk -W version 2>&1 | grep -q mawk; then interactive='-W interactive'; fi
exec awk $interactive -F '\t' -v OFS='\t' '
$7 !~ /Telespar/ { print "filter"; fflush(); next }
{ $9 = toupper($9); print "forward", $0; fflush() }'
