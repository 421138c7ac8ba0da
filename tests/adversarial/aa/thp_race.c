/* Many threads allocate/realloc huge blocks under LOCUS_THP=auto; every byte checked; fork midway. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
static int bad;
static void fill(unsigned char *p, size_t n, unsigned seed){ for(size_t i=0;i<n;i+=61) p[i]=(unsigned char)(seed+i*7); p[n-1]=(unsigned char)seed^0x5a;}
static int check(unsigned char *p, size_t n, unsigned seed){ for(size_t i=0;i<n-1;i+=61) if(p[i]!=(unsigned char)(seed+i*7)) return 0; return p[n-1]==((unsigned char)seed^0x5a);}
static void *worker(void *arg){
  unsigned seed=(unsigned)(uintptr_t)arg;
  for(int it=0;it<40;it++){
    size_t n=(size_t)(2+(seed+it)%5)<<20; n+= (seed*4099u+it*13u)%100000;
    unsigned char *p=malloc(n); if(!p){perror("malloc");bad=1;return 0;}
    if (p[0]|p[4096]|p[n-1]) {} /* just read */
    fill(p,n,seed+it);
    if(!check(p,n,seed+it)){fprintf(stderr,"bad fill t%u it%d\n",seed,it);bad=1;}
    size_t m=n*2+12345; unsigned char *q=realloc(p,m);
    if(!q){bad=1;return 0;}
    if(!check(q,n,seed+it)){fprintf(stderr,"bad after realloc t%u it%d\n",seed,it);bad=1;}
    for(size_t i=n;i<m;i+=4096) q[i]=1;
    q[m-1]=2;
    unsigned char *z=calloc(1,n); for(size_t i=0;i<n;i+=512) if(z[i]){fprintf(stderr,"calloc not zero t%u it%d off %zu\n",seed,it,i);bad=1;break;}
    free(z);
    free(q);
  }
  return 0;
}
static void h(int s){(void)s;}
int main(int argc,char**argv){
  int nt=argc>1?atoi(argv[1]):8;
  signal(SIGALRM,h);
  struct itimerval it={{0,200},{0,200}}; if(getenv("SIG")) setitimer(ITIMER_REAL,&it,0);
  pthread_t t[64];
  for(int i=0;i<nt;i++) pthread_create(&t[i],0,worker,(void*)(uintptr_t)(i*31+1));
  pid_t c=fork();
  if(c==0){ worker((void*)(uintptr_t)999); _exit(bad); }
  for(int i=0;i<nt;i++) pthread_join(t[i],0);
  int st; waitpid(c,&st,0);
  if(!WIFEXITED(st)||WEXITSTATUS(st)){fprintf(stderr,"child failed %x\n",st);bad=1;}
  printf("%s\n",bad?"FAIL":"ok"); return bad;
}
