/* LOCUS_THP=auto after mlockall(MCL_CURRENT|MCL_FUTURE): mappings arrive populated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
int main(void){
  if(mlockall(MCL_CURRENT|MCL_FUTURE)) perror("mlockall");
  int bad=0;
  for(int i=0;i<20;i++){ size_t n=((size_t)4+i%4)<<20; unsigned char *p=malloc(n); memset(p,i,n);
    for(size_t j=0;j<n;j+=4096) if(p[j]!=(unsigned char)i) bad=1;
    unsigned char *q=realloc(p,n*2); for(size_t j=0;j<n;j+=4096) if(q[j]!=(unsigned char)i) bad=1; free(q);}
  FILE*f=fopen("/proc/self/smaps_rollup","r"); char l[256]; while(fgets(l,sizeof l,f)) if(strstr(l,"AnonHuge")||strstr(l,"Locked")) fputs(l,stdout);
  puts(bad?"FAIL":"ok"); return bad; }
