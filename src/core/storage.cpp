#include "kiln/storage.h"

#include "kiln/allocator.h"
#include "kiln/backend.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The "allocator" of one external block: giving the block back runs the
// owner's release, and the object goes with it.
class ExternalBlock : public Allocator {
 public:
  explicit ExternalBlock(std::function<void()> release) : release_(std::move(release)) {}
  void* allocate(size_t) override { KILN_FAIL("an external storage cannot allocate"); }
  void deallocate(void*, size_t) override {
    if (release_) release_();
    delete this;
  }

 private:
  std::function<void()> release_;
};

}  // namespace

StorageImpl::StorageImpl(size_t n, Device d) : nbytes(n), device(d), allocator(get_allocator(d)) {
  data = allocator->allocate(nbytes);
}

Storage external_storage(void* data, size_t nbytes, Device device, std::function<void()> release) {
  auto storage = std::make_shared<StorageImpl>(0, device);
  storage->allocator->deallocate(storage->data, 0);
  storage->data = data;
  storage->nbytes = nbytes;
  storage->allocator = new ExternalBlock(std::move(release));
  return storage;
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
