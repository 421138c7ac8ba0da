#!/bin/sh
# Includes point down the layers only: fails, naming file, line and both
# layers, on an #include "..." of src/ that names a file of a higher layer
# (the order: tests/structure/layers.txt), or on a file of src/ in no layer.
#   layers.sh SOURCE_DIR
set -u
root=$(cd "${1:?usage: layers.sh SOURCE_DIR}" && pwd) || exit 2
order="$root/tests/structure/layers.txt"
cd "$root/src" || exit 2
find . -name '*.[ch]' | sed 's#^\./##' | sort | while read -r f; do
  grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    sed "s#^\([0-9]*\):[^\"]*\"\([^\"]*\)\".*#$f \1 \2#"
  echo "$f 0 $f"                       # the file itself: it must have a layer
done | awk -v order="$order" -v src="$root/src" '
  BEGIN {
    while ((getline line < order) > 0) {
      sub(/#.*/, "", line); gsub(/[[:space:]]/, "", line)
      if (line != "") { n++; name[n] = line }
    }
    if (!n) { print "layers: no layer in " order; bad = 1; exit }
  }
  # The layer of a path of src/ (0: none): the longest entry naming it.
  function layer(p,   i, best, len, e) {
    best = 0; len = 0
    for (i = 1; i <= n; i++) {
      e = name[i]
      if ((p == e || index(p, e "/") == 1 || index(p, e ".") == 1) && length(e) > len) {
        best = i; len = length(e)
      }
    }
    return best
  }
  {
    file = $1; ln = $2; inc = $3
    lf = layer(file)
    if (!lf) { if (!(file in told)) print "layers: " file " is in no layer of " order; told[file]; bad = 1; next }
    if (ln == 0) { files++; next }
    if (system("test -f \"" src "/" inc "\"")) next   # not of src/ (locus.h, system headers)
    li = layer(inc)
    if (!li) { print "layers: " inc " is in no layer of " order; bad = 1; next }
    checked++
    if (li < lf) {
      printf "layers: %s:%d includes %s: %s is above %s\n", file, ln, inc, name[li], name[lf]
      bad = 1
    }
  }
  END {
    if (bad) { print "layers: upward includes or unplaced files (order: tests/structure/layers.txt)"; exit 1 }
    printf "layers: %d includes of %d files point down the %d layers\n", checked, files, n
  }'
