#include "kiln/storage.h"

#include "kiln/allocator.h"

namespace kiln {

StorageImpl::StorageImpl(size_t n, Device d) : nbytes(n), device(d), allocator(get_allocator(d)) {
  data = allocator->allocate(nbytes);
}

StorageImpl::~StorageImpl() { allocator->deallocate(data, nbytes); }

}  // namespace kiln
