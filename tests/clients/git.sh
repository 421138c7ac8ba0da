#!/usr/bin/env bash
# Real client: git (every git process preloaded) building a generated
# repository: init, many commits, a branch, a merge, gc (delta compression,
# repack threads), then log, blame, diff, fsck. With fixed identities and
# dates every hash is determined by the content, so the outputs of the two
# runs (commit and tree hashes included) must be identical.
#   git.sh [COMMITS]   (default 150)
. "$(dirname "$0")/common.sh"
need git awk
commits=${1:-150}
cd "$WORK"

export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=$WORK
export GIT_AUTHOR_NAME=locus GIT_AUTHOR_EMAIL=locus@example.org
export GIT_COMMITTER_NAME=locus GIT_COMMITTER_EMAIL=locus@example.org
export TZ=UTC LC_ALL=C

# edit N SEED: rewrite a few files of the work tree deterministically.
edit() {
  awk -v n="$1" -v seed="$2" 'BEGIN {
    for (k = 0; k < 3; k++) {
      f = sprintf("dir%d/file%d.txt", (n + k) % 7, (n * 3 + k * 5 + seed) % 40)
      system("mkdir -p " substr(f, 1, index(f, "/") - 1))
      lines = 50 + (n * 13 + k) % 400
      for (i = 0; i < lines; i++) printf "%s line %d of commit %d seed %d %s\n", f, i, (i % 9 == 0 ? n : 0), seed, substr("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, (i * n) % 40) > f
      close(f)
    }
  }'
}

job() {
  local d=$1 i
  mkdir -p "$d" && cd "$d" || return 1
  git init -q -b main . || return 1
  git config gc.auto 0 && git config pack.threads 2 && git config core.fsyncMethod batch 2>/dev/null
  for ((i = 1; i <= commits; i++)); do
    export GIT_AUTHOR_DATE="@$((1700000000 + i * 60)) +0000" GIT_COMMITTER_DATE="@$((1700000000 + i * 60)) +0000"
    edit "$i" 0
    git add -A && git commit -q -m "commit $i on main" || return 1
    if [ "$i" -eq $((commits / 2)) ]; then git branch feature || return 1; fi
  done
  git checkout -q feature || return 1
  for ((i = 1; i <= commits / 3; i++)); do
    export GIT_AUTHOR_DATE="@$((1800000000 + i * 60)) +0000" GIT_COMMITTER_DATE="@$((1800000000 + i * 60)) +0000"
    mkdir -p feature && awk -v i=$i 'BEGIN { for (k = 0; k < 200 + i; k++) print "feature", i, k }' >feature/f$((i % 10)).txt
    git add -A && git commit -q -m "feature $i" || return 1
  done
  git checkout -q main || return 1
  export GIT_AUTHOR_DATE="@1900000000 +0000" GIT_COMMITTER_DATE="@1900000000 +0000"
  git merge -q --no-ff -m "merge feature" feature || return 1
  git tag -a v1 -m "tag v1" || return 1
  git gc -q --prune=now || return 1
  git repack -q -a -d -f --depth=50 --window=50 || return 1
  echo "== log"
  git log --all --format='%H %T %P %s' || return 1
  echo "== trees"
  git log --format=%T || return 1
  echo "== rev-list"
  git rev-list --objects --all | sort || return 1
  echo "== diff"
  git diff --stat HEAD~$((commits / 2)) HEAD || return 1
  echo "== blame"
  git blame -s dir0/file0.txt 2>/dev/null | head -n 100 || true
  echo "== archive"
  git archive --format=tar HEAD | cksum || return 1
  echo "== fsck"
  git fsck --full --strict 2>&1 || return 1
  echo "fsck-ok"
  git count-objects -v | grep -E '^(count|in-pack|packs|garbage):' || return 1
}
run_one ref git job "$WORK/ref" || die "reference run failed"
cd "$WORK"
run_one lib git job "$WORK/lib" || die "preloaded run failed"
cd "$WORK"
grep -qx fsck-ok "$WORK/git.lib.out" || die "git fsck failed in the preloaded run"
n=$(sed -n '/^== trees/,/^== rev-list/p' "$WORK/git.lib.out" | grep -c '^[0-9a-f]\{40\}$' || true)
[ "$n" -gt "$commits" ] || die "only $n trees in the log"
same "$WORK/git.ref.out" "$WORK/git.lib.out" "git outputs ($n commits on main)"
say "PASS"
