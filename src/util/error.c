/* Messages and fatal errors. Nothing here may allocate: these run inside
 * malloc, possibly with the heap in an inconsistent state. */
#include "util/error.h"

#include <stdint.h>
#include <stdlib.h>

#include "os/sys.h"

static size_t put_str(char *buf, size_t len, size_t n, const char *s) {
  if (!s) s = "(null)";
  for (; *s; s++, n++)
    if (n + 1 < len) buf[n] = *s;
  return n;
}

static size_t put_uint(char *buf, size_t len, size_t n, unsigned long v, unsigned base) {
  char tmp[32];
  int i = 0;
  do {
    tmp[i++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (i > 0) {
    if (n + 1 < len) buf[n] = tmp[i - 1];
    n++, i--;
  }
  return n;
}

/* Each argument is read with the type its conversion and length modifier
 * name: %d int, %ld long, %zd ssize_t (long here), %u/%x unsigned int,
 * %lu/%zu/%lx/%zx unsigned long (size_t is unsigned long on every LP64
 * target locus supports). */
size_t fmt_vbuf(char *buf, size_t len, const char *fmt, va_list ap) {
  size_t n = 0;
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') {
      if (n + 1 < len) buf[n] = *f;
      n++;
      continue;
    }
    f++;
    bool wide = false;
    if (*f == 'z' || *f == 'l') {
      wide = true;
      f++;
    }
    switch (*f) {
    case 's': n = put_str(buf, len, n, va_arg(ap, const char *)); break;
    case 'c': {
      char c[2] = {(char)va_arg(ap, int), 0};
      n = put_str(buf, len, n, c);
      break;
    }
    case 'd': {
      long v = wide ? va_arg(ap, long) : va_arg(ap, int);
      unsigned long u = (unsigned long)v;
      if (v < 0) {
        n = put_str(buf, len, n, "-");
        u = 0 - u;                       /* also right for LONG_MIN */
      }
      n = put_uint(buf, len, n, u, 10);
      break;
    }
    case 'u': n = put_uint(buf, len, n, wide ? va_arg(ap, unsigned long) : va_arg(ap, unsigned), 10); break;
    case 'x': n = put_uint(buf, len, n, wide ? va_arg(ap, unsigned long) : va_arg(ap, unsigned), 16); break;
    case 'p':
      n = put_str(buf, len, n, "0x");
      n = put_uint(buf, len, n, (unsigned long)(uintptr_t)va_arg(ap, void *), 16);
      break;
    case '%': n = put_str(buf, len, n, "%"); break;
    case 0: f--; break;                  /* a lone % at the end */
    default: n = put_str(buf, len, n, "?"); break;
    }
  }
  if (len) buf[n < len ? n : len - 1] = 0;
  return n;
}

size_t fmt_buf(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = fmt_vbuf(buf, len, fmt, ap);
  va_end(ap);
  return n;
}

static void emit(const char *prefix, const char *fmt, va_list ap) {
  char buf[512];
  size_t n = fmt_buf(buf, sizeof buf, "%s", prefix);
  if (n < sizeof buf) n += fmt_vbuf(buf + n, sizeof buf - n, fmt, ap);
  if (n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  os_write_stderr(buf, n);
}

void locus_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("locus: ", fmt, ap);
  va_end(ap);
  abort();
}

void locus_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("locus: warning: ", fmt, ap);
  va_end(ap);
}

void locus_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("locus: ", fmt, ap);
  va_end(ap);
}
