/* Kiln's <stddef.h> for NVRTC (which declares size_t itself).
 * Written for Kiln (MIT OR Apache-2.0). */
#ifndef KILN_NVRTC_STDDEF_H
#define KILN_NVRTC_STDDEF_H
typedef decltype(static_cast<char*>(nullptr) - static_cast<char*>(nullptr)) ptrdiff_t;
typedef decltype(nullptr) nullptr_t;
typedef long double max_align_t;
#ifndef NULL
#define NULL 0
#endif
#ifndef offsetof
#define offsetof(type, member) ((size_t) __INTADDR__(&(((type*) 0)->member)))
#endif
#endif
