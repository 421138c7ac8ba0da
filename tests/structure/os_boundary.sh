#!/bin/sh
# Every system call of the library goes through the OS layer (src/os/):
# fails, naming file and line, when another part of src/ calls a system-call
# wrapper itself. The list holds the wrappers a memory allocator could be
# tempted to call; a new one belongs in src/os/os.c.
#   os_boundary.sh SOURCE_DIR
set -u
src=${1:?usage: os_boundary.sh SOURCE_DIR}
calls='mmap|mmap64|munmap|mremap|madvise|mincore|mprotect|mbind|set_mempolicy|get_mempolicy|move_pages|migrate_pages|open|openat|open64|creat|read|pread|write|pwrite|writev|close|dup|dup2|dup3|fcntl|ioctl|fstat|stat|lstat|statx|syscall|getrandom|getpid|gettid|getppid|sched_yield|sched_getaffinity|sched_setaffinity|sched_getcpu|uname|prctl|getauxval|sysconf|getrlimit|setrlimit|clone|fork|kill|tgkill|sigaction|signal|nanosleep|usleep|clock_gettime|futex|brk|sbrk|personality|userfaultfd|memfd_create'
# A call is the name, not preceded by a letter, digit, _ . or > (os_map,
# s->read, x.write are not calls), followed by optional blanks and "(".
hits=$(find "$src/src" -name '*.[ch]' ! -path "$src/src/os/*" -print0 |
  xargs -0 grep -nE "(^|[^A-Za-z0-9_.>])($calls)[[:space:]]*\(" |
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)')
if [ -n "$hits" ]; then
  echo "os_boundary: system calls outside src/os/:"
  echo "$hits"
  exit 1
fi
n=$(find "$src/src" -name '*.[ch]' ! -path "$src/src/os/*" | wc -l)
echo "os_boundary: no system call in $n files outside src/os/"
