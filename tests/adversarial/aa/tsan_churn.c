/* Multi-threaded small/large churn under LOCUS_PROFILE=auto + LOCUS_THP=auto while another
 * thread switches profiles and options; build against build-tsan/liblocus.a (locus_* API). */
#include <locus.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
static atomic_int stop, bad;
static void *churn(void *arg){
  unsigned s=(unsigned)(uintptr_t)arg; void *keep[64]={0};
  for(int it=0;!atomic_load(&stop);it++){
    s=s*1103515245+12345; unsigned r=s>>8;
    int slot=r%64; if(keep[slot]){ unsigned char *q=keep[slot]; if(q[0]!=(unsigned char)slot) atomic_store(&bad,1); locus_free(q);} 
    size_t n = (r%100)<90 ? 16+r%2000 : (r%100)<98 ? 40000+r%300000 : (2u<<20)+r%(3u<<20);
    unsigned char *p=locus_malloc(n); if(!p){atomic_store(&bad,2);break;} p[0]=(unsigned char)slot; p[n-1]=1; keep[slot]=p;
    if(it%97==0){ p=locus_realloc(p,n*3); if(!p){atomic_store(&bad,3);break;} if(p[0]!=(unsigned char)slot) atomic_store(&bad,4); keep[slot]=p; }
  }
  for(int i=0;i<64;i++) locus_free(keep[i]);
  return 0;
}
static void *switcher(void *a){(void)a; const char *pr[]={"auto","uma","numa","eco","auto"};
  for(int i=0;!atomic_load(&stop);i++){ locus_set_profile(pr[i%5]); locus_option_set("LOCUS_THP", i%3?"auto":"off"); struct timespec ts={0,2000000}; nanosleep(&ts,0);} return 0;}
int main(int argc,char**argv){
  int nt=argc>1?atoi(argv[1]):4; double secs=argc>2?atof(argv[2]):3;
  pthread_t t[16],sw;
  for(int i=0;i<nt;i++) pthread_create(&t[i],0,churn,(void*)(uintptr_t)(i+1));
  if(!getenv("NOSWITCH")) pthread_create(&sw,0,switcher,0);
  struct timespec ts={(time_t)secs,(long)((secs-(time_t)secs)*1e9)}; nanosleep(&ts,0);
  atomic_store(&stop,1);
  for(int i=0;i<nt;i++) pthread_join(t[i],0);
  if(!getenv("NOSWITCH")) pthread_join(sw,0);
  printf("%s bad=%d\n", bad?"FAIL":"ok", bad); return bad;
}
