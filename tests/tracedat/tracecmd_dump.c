/*
 * tracecmd_dump FILE: prints every record of a trace.dat as libtracecmd
 * reads it (tracecmd_open + tracecmd_iterate_events, per buffer), one line
 * each: "BUFFER CPU TS SYSTEM:EVENT field=value ...", numbers in decimal,
 * char arrays and strings as text. The tests compare it with what usrtrace
 * recorded. C, because trace-cmd.h pulls in tracefs.h, which is not C++.
 */
#include <stdio.h>
#include <string.h>
#include <trace-cmd.h>

static const char *buffer_name;

/* libtracecmd 1.3 leaks a string of its own sscanf() while it opens a file;
 * under AddressSanitizer that would fail this program, though nothing of
 * ours leaks. Unused without the sanitizer. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static int show(struct tracecmd_input *handle, struct tep_record *rec, int cpu, void *data) {
  struct tep_handle *tep = tracecmd_get_tep(handle);
  struct tep_event *ev = tep_find_event_by_record(tep, rec);
  (void)data;
  printf("%s %d %llu ", buffer_name, cpu, rec->ts);
  if (!ev) {
    printf("UNKNOWN\n");
    return 0;
  }
  printf("%s:%s", ev->system, ev->name);
  for (struct tep_format_field *f = ev->format.fields; f; f = f->next) {
    if (f->flags & (TEP_FIELD_IS_STRING | TEP_FIELD_IS_DYNAMIC | TEP_FIELD_IS_ARRAY)) {
      int len = 0;
      const char *p = tep_get_field_raw(NULL, ev, f->name, rec, &len, 0);
      if ((f->flags & TEP_FIELD_IS_STRING) || strstr(f->type, "char")) {
        int n = p ? (int)strnlen(p, (size_t)len) : 0;
        while (n > 0 && p[n - 1] == '\n') n--;
        printf(" %s=%.*s", f->name, n, p ? p : "");
      } else {
        printf(" %s=", f->name);
        for (int i = 0; p && i < len; i++) printf("%02x", (unsigned char)p[i]);
      }
      continue;
    }
    unsigned long long v = 0;
    tep_read_number_field(f, rec->data, &v);
    if ((f->flags & TEP_FIELD_IS_SIGNED) && f->size < 8) {
      int shift = 64 - 8 * f->size;
      printf(" %s=%lld", f->name, ((long long)(v << shift)) >> shift);
    } else if (f->flags & TEP_FIELD_IS_SIGNED) {
      printf(" %s=%lld", f->name, (long long)v);
    } else {
      printf(" %s=%llu", f->name, v);
    }
  }
  printf("\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: tracecmd_dump FILE\n");
    return 2;
  }
  struct tracecmd_input *h = tracecmd_open(argv[1], 0);
  if (!h) {
    fprintf(stderr, "tracecmd_dump: cannot open %s\n", argv[1]);
    return 1;
  }
  buffer_name = "top";
  tracecmd_iterate_events(h, NULL, 0, show, NULL);
  int n = tracecmd_buffer_instances(h);
  for (int i = 0; i < n; i++) {
    struct tracecmd_input *b = tracecmd_buffer_instance_handle(h, i);
    if (!b) {
      fprintf(stderr, "tracecmd_dump: no handle for buffer %d\n", i);
      return 1;
    }
    buffer_name = tracecmd_buffer_instance_name(h, i);
    tracecmd_iterate_events(b, NULL, 0, show, NULL);
    tracecmd_close(b);
  }
  tracecmd_close(h);
  return 0;
}
