// How many 2-block clusters fit on the GPU at once (cudaOccupancyMaxActiveClusters), for the
// block shapes of the cluster-reduce examples. Build and run on the device machine:
//   nvcc -arch=sm_90a -o /tmp/occ benchmarks/probes/cluster_reduce/occupancy.cu && /tmp/occ
#include <cstdio>
#include <cuda_runtime.h>

template <int THREADS>
__global__ void __launch_bounds__(THREADS) probe(float* out) {
    extern __shared__ float s[];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (out) out[blockIdx.x] = s[(threadIdx.x + 1) % THREADS];
}

template <int THREADS>
void query(int cluster, int smem_bytes) {
    auto fn = probe<THREADS>;
    cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2112);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = smem_bytes;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
    cfg.attrs = &attr; cfg.numAttrs = 1;
    int clusters = -1, blocks = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, THREADS, smem_bytes);
    printf("threads %4d  smem %6d B  cluster %d: %5d active clusters (%s), %2d blocks/SM without clusters; "
           "1056 clusters = %.2f waves\n", THREADS, smem_bytes, cluster, clusters, cudaGetErrorString(e), blocks,
           clusters > 0 ? 1056.0 / clusters : -1.0);
}

int main() {
    cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
    printf("%s: %d SMs\n", p.name, p.multiProcessorCount);
    for (int smem : {16384, 32768}) {
        query<128>(2, smem); query<256>(2, smem); query<512>(2, smem); query<1024>(2, smem);
        query<256>(1, smem); query<1024>(1, smem);
    }
    return 0;
}
