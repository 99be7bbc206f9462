/* Lets memcheck run a valkey-server linked against jemalloc. Memcheck replaces malloc, free,
 * realloc and malloc_usable_size (with --soname-synonyms=somalloc=*jemalloc*), but valkey also
 * calls jemalloc's own sdallocx, nallocx and mallctl, which must not see memcheck's pointers.
 * Preloaded by scripts/valgrind-server.sh for `make test-valgrind` only. */
#include <string.h>
#include <stdlib.h>

void sdallocx(void *ptr, size_t size, int flags) { (void)size; (void)flags; free(ptr); }
size_t nallocx(size_t size, int flags) { (void)flags; return size; }
/* Every statistic reads as zero; every setting is accepted (valkey asserts success). */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
    (void)name; (void)newp; (void)newlen;
    if (oldp && oldlenp) memset(oldp, 0, *oldlenp);
    return 0;
}
void malloc_stats_print(void (*write_cb)(void *, const char *), void *opaque, const char *opts) {
    (void)opts;
    if (write_cb) write_cb(opaque, "memcheck: no allocator stats\n");
}
