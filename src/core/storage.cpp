#include "kiln/storage.h"

#include "kiln/allocator.h"
#include "kiln/backend.h"

namespace kiln {

StorageImpl::StorageImpl(size_t n, Device d) : nbytes(n), device(d), allocator(get_allocator(d)) {
  data = allocator->allocate(nbytes);
}

StorageImpl::~StorageImpl() { allocator->deallocate(data, nbytes); }

void StorageImpl::move_to(Device to) {
  if (to == device) return;
  Allocator* target = get_allocator(to);
  void* moved = target->allocate(nbytes);
  copy_between(to, moved, device, data, nbytes);
  allocator->deallocate(data, nbytes);
  data = moved;
  device = to;
  allocator = target;
  version++;
}

}  // namespace kiln
