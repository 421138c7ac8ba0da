/* Prints the options table of the library (config/options.c) as the Markdown
 * table of the README, so the README is checked against, and regenerated
 * from, the code: check_options_doc.sh. */
#include <stdio.h>
#include <string.h>

#include "config/options.h"

int main(void) {
  printf("| variable | type | default | accepted | run time | meaning |\n");
  printf("|---|---|---|---|---|---|\n");
  for (size_t i = 0; options_info(i); i++) {
    const option_info_t *o = options_info(i);
    printf("| `%s` | %s | %s | %s | %s | %s |\n", o->env, o->type, *o->def ? o->def : "(none)", o->range,
           o->runtime ? "yes" : "no", o->doc);
  }
  return 0;
}
