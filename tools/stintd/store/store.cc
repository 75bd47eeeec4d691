#include "stintd/store/store.h"

namespace stint::stintd {

Result<std::unique_ptr<Store>> Store::Open(const std::string& where) {
  auto starts = [&](const char* prefix) { return where.rfind(prefix, 0) == 0; };
  if (starts("postgresql://") || starts("postgres://")) return OpenPostgresStore(where);
  if (starts("sqlite:")) return OpenSqliteStore(where.substr(7));
  return OpenSqliteStore(where);
}

}  // namespace stint::stintd
