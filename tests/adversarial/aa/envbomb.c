/* exec target with a hostile environment: 10000 LOCUS_ vars, a huge one, no '=', non-UTF-8 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc,char**argv){
  if(argc>1 && !strcmp(argv[1],"child")){ void *p=malloc(100); free(p); printf("child ok\n"); return 0; }
  int n=10000; char **env=calloc(n+10,sizeof *env); int k=0;
  for(int i=0;i<n;i++){ char *s=malloc(64); snprintf(s,64,"LOCUS_X%05d=%d",i,i); env[k++]=s; }
  char *huge=malloc(100000); memcpy(huge,"LOCUS_PROFLE",12); memset(huge+12,'A',99000); huge[99012]=0; env[k++]=huge; /* huge name, no '=' */
  env[k++]="LOCUS_PROFLE=auto";
  env[k++]="LOCUS_\xff\xfe\x80THP=auto";
  env[k++]="LOCUS_";
  env[k++]="LOCUS_=x";
  env[k++]="LOCUS_THPP";
  env[k++]="LOCUS_PRELOAD=1";
  env[k++]=getenv("LD_PRELOAD")? (char*)(getenv("LD_PRELOAD")-11):"X=1";
  env[k]=0;
  execve(argv[0],(char*[]){argv[0],"child",0},env); perror("execve"); return 1;
}
