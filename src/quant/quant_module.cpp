// quant rung
namespace lowbit {}
