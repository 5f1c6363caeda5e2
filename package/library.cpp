// libchorus.so's own symbol: the rest of the library is the layers' objects, linked whole.
#include "chorus.h"

namespace chorus {

const char* library_version() {
  return CHORUS_VERSION_STRING;
}

}  // namespace chorus
