// Trains workload W2 (a small CNN) on Fashion-MNIST with SGD + momentum and a
// cosine learning-rate decay, and prints the test accuracy.
// Usage: fashion_mnist_train [epochs] [batch_size] [lr]
#include <cstdio>
#include <cstdlib>

#include "kiln/kiln.h"

using namespace kiln;

// conv(1->32)-ReLU-pool - conv(32->64)-ReLU-pool - fc(3136->128)-ReLU-fc(128->10)
class W2 : public nn::Cell {
 public:
  W2() {
    conv1 = register_cell("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}));
    conv2 = register_cell("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}));
    fc1 = register_cell("fc1", std::make_shared<nn::Dense>(3136, 128));
    fc2 = register_cell("fc2", std::make_shared<nn::Dense>(128, 10));
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = max_pool2d(relu((*conv1)(x)), {2, 2});
    h = max_pool2d(relu((*conv2)(h)), {2, 2});
    return (*fc2)(relu((*fc1)(h.flatten(1))));
  }
  std::string type_name() const override { return "W2"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dense> fc1, fc2;
};

int main(int argc, char** argv) {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  int64_t batch_size = argc > 2 ? std::atoll(argv[2]) : 64;
  double lr = argc > 3 ? std::atof(argv[3]) : 0.05;
  try {
    manual_seed(0);
    data::BatchIterator train_set(data::load_fashion_mnist("train"), batch_size, /*shuffle=*/true, false, /*seed=*/1);
    data::BatchIterator test_set(data::load_fashion_mnist("test"), 1000, /*shuffle=*/false);

    auto net = std::make_shared<W2>();
    std::printf("%s", net->summary().c_str());
    auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = lr, .momentum = 0.9});
    train::Model model(net, [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); }, sgd);
    auto schedule = optim::cosine_schedule(lr, epochs * train_set.batches_per_epoch());
    model.train(epochs, train_set,
                {std::make_shared<train::LossMonitor>(100), std::make_shared<train::LearningRateScheduler>(schedule)});
    train::EvalResult r = model.eval(test_set);
    std::printf("test accuracy %.2f%%, test loss %.4f (%lld images)\n", 100 * r.accuracy, r.loss,
                static_cast<long long>(r.samples));
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
