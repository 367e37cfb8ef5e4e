// eval rung
namespace lowbit {}
