/* Threads churn (small frees drive the thread-cache tick, large ones the sources)
 * while main forks repeatedly; each child allocates, checks and exits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/wait.h>
static atomic_int stop;
static void *churn(void *a){ unsigned s=(unsigned)(uintptr_t)a; void *k[32]={0};
  while(!atomic_load(&stop)){ s=s*1103515245+12345; int i=(s>>8)%32; free(k[i]);
    size_t n=(s>>16)%10<8? 16+(s>>4)%1000 : ((s>>20)%10<8? 100000+(s>>4)%500000 : (4u<<20)+(s>>4)%(4u<<20));
    k[i]=malloc(n); memset(k[i],1,n<4096?n:4096);} for(int i=0;i<32;i++) free(k[i]); return 0;}
int main(int argc,char**argv){ int nt=argc>1?atoi(argv[1]):3, nf=argc>2?atoi(argv[2]):100; pthread_t t[16];
  for(int i=0;i<nt;i++) pthread_create(&t[i],0,churn,(void*)(uintptr_t)(i+7));
  int bad=0;
  for(int f=0;f<nf;f++){ pid_t c=fork(); if(!c){ for(int j=0;j<50;j++){ size_t n=j%5?1000:(5u<<20); char*p=malloc(n); memset(p,j,n); for(size_t q=0;q<n;q+=509) if(p[q]!=(char)j) _exit(3); free(p);} _exit(0);} 
    int st; if(waitpid(c,&st,0)!=c||!WIFEXITED(st)||WEXITSTATUS(st)){fprintf(stderr,"child %d status %x\n",f,st);bad=1;} }
  atomic_store(&stop,1); for(int i=0;i<nt;i++) pthread_join(t[i],0); puts(bad?"FAIL":"ok"); return bad;}
