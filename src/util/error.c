/* Messages and fatal errors. Nothing here may allocate: these run inside
 * malloc, possibly with the heap in an inconsistent state. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static size_t put_str(char *buf, size_t len, size_t n, const char *s) {
  for (; *s; s++, n++)
    if (n + 1 < len) buf[n] = *s;
  return n;
}

static size_t put_uint(char *buf, size_t len, size_t n, unsigned long v, unsigned base, int min_digits) {
  char tmp[32];
  int i = 0;
  do {
    tmp[i++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (i < min_digits) tmp[i++] = '0';
  while (i > 0) {
    if (n + 1 < len) buf[n] = tmp[i - 1];
    n++, i--;
  }
  return n;
}

size_t fmt_vbuf(char *buf, size_t len, const char *fmt, va_list ap) {
  size_t n = 0;
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') {
      if (n + 1 < len) buf[n] = *f;
      n++;
      continue;
    }
    f++;
    if (*f == 'z' || *f == 'l') f++;
    switch (*f) {
    case 's': n = put_str(buf, len, n, va_arg(ap, const char *)); break;
    case 'd': {
      long v = va_arg(ap, int);
      if (v < 0) { n = put_str(buf, len, n, "-"); v = -v; }
      n = put_uint(buf, len, n, (unsigned long)v, 10, 1);
      break;
    }
    case 'u': n = put_uint(buf, len, n, va_arg(ap, unsigned long), 10, 1); break;
    case 'x': n = put_uint(buf, len, n, va_arg(ap, unsigned long), 16, 1); break;
    case 'p':
      n = put_str(buf, len, n, "0x");
      n = put_uint(buf, len, n, (unsigned long)va_arg(ap, void *), 16, 1);
      break;
    case '%': n = put_str(buf, len, n, "%"); break;
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
  ssize_t w = write(2, buf, n);
  (void)w;
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
