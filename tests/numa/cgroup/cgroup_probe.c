/* Runs in a memory cgroup (tests/numa/cgroup/cgroup_v2.sh, in a QEMU guest
 * with cgroup v2): checks what locus's pressure reader found (version and the
 * binding limit, from locus_stats_json) and runs large arrays of varying sizes
 * through the allocator, failing on a NULL or a lost word.
 *
 *   cgroup_probe [--expect-version V] [--expect-limit BYTES] [--steps N] [--arrays K] [--max-mib M]
 *
 * Exit status: 0 ok; 1 a check failed; 3 malloc returned NULL. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long json_num(const char *js, const char *key) {
    const char *p = strstr(js, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -2;
}

int main(int argc, char **argv) {
    long want_version = -1, want_limit = -1, steps = 12, arrays = 6, max_mib = 12;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--expect-version")) want_version = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--expect-limit")) want_limit = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--arrays")) arrays = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-mib")) max_mib = atol(argv[i + 1]);
        else { fprintf(stderr, "cgroup_probe: unknown option %s\n", argv[i]); return 2; }
    }
    int bad = 0;
    uint64_t seed = 12345;
    char *a[64] = {0};
    size_t n[64] = {0};
    if (arrays > 64) arrays = 64;
    for (long s = 0; s < steps; s++) {
        for (long k = 0; k < arrays; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            n[k] = ((size_t)1 << 20) + (size_t)((seed >> 33) % ((uint64_t)(max_mib - 1) << 20));
            a[k] = malloc(n[k]);
            if (!a[k]) { fprintf(stderr, "cgroup_probe: malloc(%zu) returned NULL at step %ld\n", n[k], s); return 3; }
            for (size_t o = 0; o < n[k]; o += 4096) a[k][o] = (char)(o >> 12) ^ (char)k;
        }
        for (long k = 0; k < arrays; k++) {
            for (size_t o = 0; o < n[k]; o += 4096 * 64)
                if (a[k][o] != ((char)(o >> 12) ^ (char)k)) { fprintf(stderr, "cgroup_probe: lost word\n"); return 1; }
            free(a[k]);
        }
        struct timespec ts = {0, 30 * 1000000};   /* lets the controller sample between steps */
        nanosleep(&ts, NULL);
    }
    size_t (*js)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "locus_stats_json");
    if (want_version >= 0 || want_limit >= 0) {
        if (!js) { fprintf(stderr, "cgroup_probe: locus_stats_json not found (run with liblocus)\n"); return 1; }
        static char buf[65536];
        js(buf, sizeof buf);
        const char *pr = strstr(buf, "\"pressure\":");
        if (!pr) { fprintf(stderr, "cgroup_probe: no pressure record in the statistics\n"); return 1; }
        long v = json_num(pr, "\"cgroup\":"), lim = json_num(pr, "\"cgroup_limit\":");
        printf("cgroup_probe: reader sees cgroup v%ld, limit %ld\n", v, lim);
        if (want_version >= 0 && v != want_version) { fprintf(stderr, "cgroup_probe: FAIL version %ld, expected %ld\n", v, want_version); bad = 1; }
        if (want_limit >= 0 && lim != want_limit) { fprintf(stderr, "cgroup_probe: FAIL limit %ld, expected %ld\n", lim, want_limit); bad = 1; }
    }
    printf("cgroup_probe: %ld steps of %ld arrays done\n", steps, arrays);
    return bad;
}
