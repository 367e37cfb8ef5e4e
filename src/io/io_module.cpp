// io rung
namespace lowbit {}
