// kernels rung
namespace lowbit {}
