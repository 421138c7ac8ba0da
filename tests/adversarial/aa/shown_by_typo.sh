#!/usr/bin/env bash
# Finding: once a process printed its banner (LOCUS_VERBOSE=1) or any warning,
# LOCUS_SHOWN_BY silences the misspelled-name check in every descendant, also
# for a misspelling that only the descendant has (never warned by anyone).
# usage: shown_by_typo.sh path/to/liblocus.so   (expected: one LOCUS_PROFLE warning)
lib=${1:?liblocus.so}
env LD_PRELOAD="$lib" LOCUS_VERBOSE=1 bash -c 'LOCUS_PROFLE=eco /bin/true' 2>&1 | grep -c 'LOCUS_PROFLE is not a locus setting'
