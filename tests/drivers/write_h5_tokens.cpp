// Test helper: write_h5_tokens TEXT OUT.h5 writes TEXT's bytes as a 1-D
// int32 dataset "tokens" (what a Python pipeline would write with h5py).
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_h5_tokens TEXT OUT.h5\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::int32_t> tokens(bytes.begin(), bytes.end());
  const hsize_t n = tokens.size();
  const hid_t f = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t s = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(f, "tokens", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = f >= 0 && d >= 0 && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()) >= 0;
  H5Dclose(d);
  H5Sclose(s);
  H5Fclose(f);
  return ok ? 0 : 1;
}
