// The one source of libonyx.so next to its layers' archives: it compiles the umbrella
// header from the source tree, so a public header that stops compiling fails the build.
#include <onyx/onyx.h>
