// The NCCL communicator on a GPU: one rank (the group NCCL allows on one device) all-reducing,
// all-gathering and reduce-scattering device buffers on the caller's stream, a host all-reduce,
// a barrier and the transport it reports. Skips, saying why, without a GPU (this file is built
// only with CUDA).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kiln/comm/nccl_communicator.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#include "kiln/kernels/cuda/cuda_stream.h"

namespace kiln {
namespace {

class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDevices d = cuda_devices();
    if (d.count == 0) GTEST_SKIP() << "no GPU visible: " << d.reason;
    cuda_use_device(0);
    NcclOptions o;
    o.timeout = std::chrono::milliseconds(60000);
    comm_ = make_nccl_communicator(std::make_shared<MemoryStore>(), 0, 1, o);
    stream_ = std::make_unique<CudaStream>();
  }

  float* upload(const std::vector<float>& v) {
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(float)));
    auto* d = static_cast<float*>(p);
    KILN_CUDA_CHECK(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice,
                                    stream_->native()));
    buffers_.push_back(d);
    return d;
  }
  std::vector<float> download(const float* d, size_t n) {
    std::vector<float> v(n);
    KILN_CUDA_CHECK(
        cudaMemcpyAsync(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream_->native()));
    stream_->synchronize();
    return v;
  }
  void TearDown() override {
    for (float* d : buffers_) cudaFree(d);
  }

  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<CudaStream> stream_;
  std::vector<float*> buffers_;
};

TEST_F(NcclGpu, CollectivesOnDeviceBuffers) {
  constexpr size_t n = 4099;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->transport().rfind("nccl ", 0), 0u) << comm_->transport();
  float* a = upload(x);
  comm_->all_reduce_async(a, n, DType::F32, ReduceOp::kSum, stream_.get())->wait(*stream_);
  EXPECT_EQ(download(a, n), x);
  comm_->all_reduce_async(a, n, DType::F32, ReduceOp::kMax, stream_.get())->wait_host();
  EXPECT_EQ(download(a, n), x);
  float* g = upload(std::vector<float>(n, -1.0f));
  comm_->all_gather_async(g, a, n, DType::F32, stream_.get())->wait(*stream_);
  EXPECT_EQ(download(g, n), x);
  float* rs = upload(std::vector<float>(n, 0.0f));
  comm_->reduce_scatter_async(rs, a, n, DType::F32, ReduceOp::kMean, stream_.get())->wait(*stream_);
  EXPECT_EQ(download(rs, n), x);
  double host[2] = {1.5, -2.0};
  comm_->all_reduce(host, 2, ReduceOp::kSum);
  EXPECT_EQ(host[0], 1.5);
  EXPECT_EQ(host[1], -2.0);
  comm_->barrier();
  // Host buffers (after null) are staged through device memory.
  std::vector<float> h = x;
  comm_->all_reduce(h.data(), n, ReduceOp::kSum);
  EXPECT_EQ(h, x);
}

TEST_F(NcclGpu, SplitOfOne) {
  auto sub = comm_->split({0}, "intra");
  EXPECT_EQ(sub->world_size(), 1);
  double v = 3.0;
  sub->all_reduce(&v, 1, ReduceOp::kMax);
  EXPECT_EQ(v, 3.0);
}

}  // namespace
}  // namespace kiln
