/* Stats report at exit: ./exit_report close2 | close2reuse | _exit | abort (LOCUS_STATS=1, preloaded). */
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>
#include <signal.h>
void *volatile g;
int main(int c,char**v){ g=malloc(1000); g=malloc(10<<20);
 if(!strcmp(v[1],"close2")){ close(2); }
 if(!strcmp(v[1],"close2reuse")){ close(2); FILE*f=fopen("/tmp/aa_tr/victim","w"); fprintf(f,"victim\n"); fflush(f); }
 if(!strcmp(v[1],"_exit")) _exit(0);
 if(!strcmp(v[1],"abort")) abort();
 return 0; }
